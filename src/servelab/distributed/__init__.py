"""Work beyond one machine: arms placed on a Ray cluster (`raydriver`), what an arm asks for
(`placement`, no Ray needed), and the cluster's nodes and their probes (`raycluster`)."""
