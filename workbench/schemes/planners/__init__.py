"""The planners layer (inside schemes): the papers' planners (Galaxy Alg. 1, STI two-stage, Hepti MILP, pipeline
MILP) and the arena evaluators that plan; no scheme module imports them."""
