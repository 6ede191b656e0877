import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import performance_function, sanity_function, run_after


@rfm.simple_test
class SanityFails(rfm.RunOnlyRegressionTest):
    valid_systems = ['*']
    valid_prog_environs = ['*']
    executable = 'echo'
    executable_opts = ['time: 1.5']

    @sanity_function
    def validate(self):
        return sn.assert_found(r'converged', self.stdout)

    @performance_function('s')
    def total_time(self):
        return sn.extractsingle(r'time: (\S+)', self.stdout, 1, float)
