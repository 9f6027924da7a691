"""Moving trained weights out of (and into) this package: HuggingFace transformers' ELECTRA."""
