"""Datasets: loaders registered by name turn a source into rows {id, prompt, answer, data_source}."""
