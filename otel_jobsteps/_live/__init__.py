"""Door one, the processor's side: the job thread's hooks and what reads them (the watch of
live spans), the background queue, the writer thread, the writer process and its relay."""
