"""megaprov: turn a set of Linux GPU machines into a verified Megatron-LM training cluster."""

__version__ = "0.2.0"
