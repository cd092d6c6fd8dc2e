pytest_plugins = ["sim.fixtures_index"]
