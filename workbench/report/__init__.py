"""The report layer: the Recorder (results.csv and charts), tables in human units, chart checks, prose from data, the fidelity scoreboard and the notebook runner."""
