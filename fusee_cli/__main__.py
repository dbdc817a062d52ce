"""`python -m fusee_cli`: the `fusee` command."""

from fusee_cli.app import main

main()
