"""The paper-scale campaign: ``core`` (settings, state, run, resume, replay, pin), ``page`` (the set's replication
report and provenance), ``variants`` (E1's diagnostic variants imported into the set), ``load`` (what shared the
machine with a job). Command line: ``python -m tools.campaign <step> --help``."""
