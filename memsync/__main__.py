from memsync.cli import main

main()
