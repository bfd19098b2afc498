"""What a run will cost before it starts, and what its steps did: bytes per chip (`memory`, and `check_fits`),
chip-hours and money (`cost`), a step's model FLOPs and MFU (`flops`).

Pure Python, above the model families: the model's part of every estimate (its weights, the weights a token passes
through, its KV cache per sequence) comes from the family's spec (`rlexp.families`), composed here with the
trainer's part (reference copy, optimizer state, the algorithm's extra passes).
"""
