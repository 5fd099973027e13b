module iadeep.dev/benchmarks/extenderload

go 1.26
