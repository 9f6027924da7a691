"""ELECTRA networks and objectives (Keras 3): config, layers, encoder, pretrainer, metrics."""
