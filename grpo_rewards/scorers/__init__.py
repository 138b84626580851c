"""Built-in scorers, one module per family; each module is a plugin implementing the hooks."""
