"""Tiny stand-ins for remote-code looped LMs (their public modeling code is not importable offline): each keeps the
family's module names, config class and fields, and forward semantics, written here from the public description."""
