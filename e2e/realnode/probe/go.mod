module raytrain.dev/e2e/realnode/probe

go 1.26.0
