"""``python -m loki`` runs the same entry point as the ``loki`` console script."""

from loki.entry import main

if __name__ == "__main__":
    main()
