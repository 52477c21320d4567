"""The one data layer: synthetic generators and real-data loaders, one module per experiment."""
