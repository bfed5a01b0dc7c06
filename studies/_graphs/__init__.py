"""Graph code shared by the graph studies: masks by name, the models and training loops they sweep."""
