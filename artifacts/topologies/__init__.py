"""Built-in topologies (`deepinfer-compile` with no file uses tiny-cpu)."""
