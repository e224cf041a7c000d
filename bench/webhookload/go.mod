module berth.dev/bench/webhookload

go 1.26
