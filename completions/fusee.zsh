
#compdef fusee

_fusee_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _FUSEE_COMPLETE=complete_zsh fusee)
}

compdef _fusee_completion fusee

