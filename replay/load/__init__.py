"""Load: the levels of a run, their arrival plans (recorded, Poisson) and the closed and open loops that send at them."""
