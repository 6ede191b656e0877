import os

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import performance_function, sanity_function


@rfm.simple_test
class FailsOnce(rfm.RunOnlyRegressionTest):
    """Fails its sanity on the first attempt and passes on the retry (a marker file outside the
    stage directory remembers the attempt); a second test passes at once."""
    valid_systems = ['*']
    valid_prog_environs = ['*']
    executable = 'sh'
    executable_opts = ['-c', '"if [ -e $MARKER ]; then echo converged; fi; touch $MARKER; echo time: 1.5"']

    @sanity_function
    def validate(self):
        return sn.assert_found(r'converged', self.stdout)

    @performance_function('s')
    def total_time(self):
        return sn.extractsingle(r'time: (\S+)', self.stdout, 1, float)


@rfm.simple_test
class PassesAtOnce(rfm.RunOnlyRegressionTest):
    valid_systems = ['*']
    valid_prog_environs = ['*']
    executable = 'echo'
    executable_opts = ['converged time: 2.5']

    @sanity_function
    def validate(self):
        return sn.assert_found(r'converged', self.stdout)

    @performance_function('s')
    def total_time(self):
        return sn.extractsingle(r'time: (\S+)', self.stdout, 1, float)
