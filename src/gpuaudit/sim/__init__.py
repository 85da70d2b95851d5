"""The simulated fleet: workload scenarios and load model, the bulk writer, the fake NVML and the simulated agent."""
