"""Lightning DataModules for the real datasets, and data-root resolution."""
