module berth.dev/bench/evictfloor

go 1.26
