-- Room on each page of collect's lock rows for their next version (issue 38): a request
-- inserts a trace's and a job's row to lock them, then updates them once its spans are placed
-- (the trace's span count, the job's state). With full pages each new version went to another
-- page and into every index; with room it stays on its page (a HOT update, no index entry).
-- A job's state is some 6 times its bare row, hence a job row's page is filled to a tenth.
-- Only pages written from now on keep the room; either layout (the staging tables are plain).
ALTER TABLE otlp_trace SET (fillfactor = 50);
ALTER TABLE otlp_job SET (fillfactor = 10);
