"""Planning: the spec, the grid, the plan with its copies, where trials start, resume."""
