"""Data: images and colour conversions (:mod:`.images`), data sets (:mod:`.datasets`), quality
metrics (:mod:`.metrics`) and downloads (:mod:`.fetch`)."""
