"""The ``chronos`` command: one module per subcommand, ``main`` dispatches."""
