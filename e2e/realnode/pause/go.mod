module raytrain.dev/e2e/realnode/pause

go 1.26.0
