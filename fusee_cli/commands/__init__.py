"""One module per `fusee` command; each imports the engine and rich only when it runs."""
