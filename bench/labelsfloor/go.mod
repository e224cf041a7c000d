module berth.dev/bench/labelsfloor

go 1.26
