"""PyInstaller entry script of the dracni bundle (CNI plugin + operator CLI + service)."""

from dracni.entry import main

if __name__ == "__main__":
    main()
