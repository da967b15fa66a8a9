class FastPath:
    """The fast-path interface an area calls (its methods are C-level only)."""
