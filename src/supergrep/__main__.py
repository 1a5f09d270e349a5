from supergrep.launcher import main

main()
