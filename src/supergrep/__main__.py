from supergrep.cli import main

main()
