"""Pure status logic: conditions and phase derived from children and the runtime report."""
