module berth.dev/bench/listfloor

go 1.26

require berth.dev/bench/apiclient v0.0.0

replace berth.dev/bench/apiclient => ../apiclient
