"""Reading a lossless-claw lcm.db: the source snapshot, its schema generations, the tables read."""
