from inferd.cli import main

main()
