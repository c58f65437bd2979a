from servelab.cli import main

main()
