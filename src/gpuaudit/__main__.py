from gpuaudit.cli import main

main()
