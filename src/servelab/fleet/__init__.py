"""Fleet-scale planning: the capacity search over deployments (issue 19)."""
