import time
t0 = time.time()
import pytest
t1 = time.time()
import hypothesis
t2 = time.time()
import numpy
t3 = time.time()
import aml_core, aml_core.testing, aml_core.host
t4 = time.time()
print(f"imports: pytest {t1-t0:.1f} s, hypothesis {t2-t1:.1f} s, numpy {t3-t2:.1f} s, aml_core+testing {t4-t3:.1f} s")
