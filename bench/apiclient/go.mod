module berth.dev/bench/apiclient

go 1.26
