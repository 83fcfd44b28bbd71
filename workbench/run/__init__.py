"""Running things: the command line (:mod:`.cli`), the notebook pipeline (:mod:`.pipeline`),
sweeps (:mod:`.sweep`) and the report (:mod:`.report`)."""
