"""Adapters to trainers (TRL, verl). Each registers itself with `compose.register_adapter` when
imported, which the package's `__init__` does: that is what `reward.as_trl()` and `as_verl()` call."""
