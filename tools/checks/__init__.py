"""What measures and attacks props: the benchmark suites, the chaos run, the workload
they load, the hostile critic, scratch databases."""
