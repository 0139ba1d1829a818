from skuferry.start import main

main()
