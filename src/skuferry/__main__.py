from skuferry.cli import main

main()
