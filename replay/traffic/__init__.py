"""Traffic: reading and writing traffic files, drawing mixes from them, their profile, and the prompt pool."""
