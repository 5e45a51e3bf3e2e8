"""The package's shape: the layers, the direction of imports, circles."""
