-- bc_take_admission: migrations/functions/bc_take_admission.sql

-- bc_place_batch: migrations/functions/bc_place_batch.sql
