module berth.dev/bench/webhookfloor

go 1.26
