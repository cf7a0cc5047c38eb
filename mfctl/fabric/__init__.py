"""Traffic matrices, regions, circuit planning, lane/port mapping, routes, step-time model."""
