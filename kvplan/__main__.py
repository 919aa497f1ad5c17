from kvplan.cli import main

main()
