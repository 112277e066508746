#!/usr/bin/env bash
# Sourced on a lent GPU machine after scripts/device_env.sh, in the repository root: unpacks the
# Open MPI runtime that scripts/pack_openmpi.sh carried (.carry/openmpi.tar.xz) and points Open MPI
# and PMIx at it, for `mpirun -np N` on this one host as root, with no network fabric:
#   source scripts/device_env.sh; source scripts/device_mpi_env.sh
#   mpirun -np 2 cnnergy dist-train --launcher mpi --device cuda ...
# The paths are forced; the OMPI_MCA_*/PMIX_MCA_* choices below are defaults that a value set before
# sourcing overrides. Reads only: nothing here changes a GPU setting.
set -u
export CARRY=${CARRY:-$PWD/.carry}
OMPI_HOME=${OMPI_HOME:-/tmp/ompi}
if [ ! -f "$CARRY/openmpi.tar.xz" ]; then
  echo "device_mpi_env: $CARRY/openmpi.tar.xz is missing (run scripts/pack_openmpi.sh)" >&2
  return 1 2>/dev/null || exit 1
fi
mkdir -p "$OMPI_HOME" && tar -xJf "$CARRY/openmpi.tar.xz" -C "$OMPI_HOME"
# Libraries the tarball leaves to lib.tar.xz (device_env.sh unpacks that into /tmp/cnnergy_lib).
for _l in $(cat "$OMPI_HOME/SHARED_LIBS" 2>/dev/null); do
  [ -f "/tmp/cnnergy_lib/$_l" ] ||
    echo "device_mpi_env: /tmp/cnnergy_lib/$_l is missing: source scripts/device_env.sh first" >&2
done
unset _l
export OMPI_HOME

# Relocation: the installation directories Open MPI (OPAL) and PMIx were built with, redirected.
export OPAL_PREFIX=$OMPI_HOME OPAL_EXEC_PREFIX=$OMPI_HOME OPAL_BINDIR=$OMPI_HOME/bin \
  OPAL_LIBDIR=$OMPI_HOME/lib OPAL_PKGLIBDIR=$OMPI_HOME/lib/openmpi3 \
  OPAL_DATAROOTDIR=$OMPI_HOME/share OPAL_DATADIR=$OMPI_HOME/share \
  OPAL_PKGDATADIR=$OMPI_HOME/share/openmpi OPAL_SYSCONFDIR=$OMPI_HOME/etc
export PMIX_PREFIX=$OMPI_HOME/pmix PMIX_INSTALL_PREFIX=$OMPI_HOME/pmix \
  PMIX_EXEC_PREFIX=$OMPI_HOME/pmix PMIX_LIBDIR=$OMPI_HOME/pmix/lib \
  PMIX_PKGLIBDIR=$OMPI_HOME/pmix/lib/pmix PMIX_DATAROOTDIR=$OMPI_HOME/pmix/share \
  PMIX_DATADIR=$OMPI_HOME/pmix/share PMIX_PKGDATADIR=$OMPI_HOME/pmix/share/pmix \
  PMIX_SYSCONFDIR=$OMPI_HOME/pmix/etc
export OMPI_MCA_mca_base_component_path=$OMPI_HOME/lib/openmpi3
export PMIX_MCA_mca_base_component_path=$OMPI_HOME/pmix/lib/pmix
export PATH=$OMPI_HOME/bin:$PATH
export LD_LIBRARY_PATH=$OMPI_HOME/lib:${LD_LIBRARY_PATH:-}

# As root, on one host, over shared memory only.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}                 # no UCX / OFI / PSM (not carried)
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}          # loopback + shared memory, no TCP
# Single-copy through process_vm_readv (CMA) can be refused in a VM or sandbox; copy through the
# shared segment instead (MPI carries the control plane and the NCCL id here, not the gradients).
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
# mpirun binds each rank to one core by default: that would starve the data-loader threads.
export OMPI_MCA_hwloc_base_binding_policy=${OMPI_MCA_hwloc_base_binding_policy:-none}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated}            # local launches only: no ssh needed
export OMPI_MCA_btl_base_warn_component_unused=0
# PMIx: its own hash store (no shared-memory store) and no munge daemon to ask.
export PMIX_MCA_gds=${PMIX_MCA_gds:-hash} PMIX_MCA_psec=${PMIX_MCA_psec:-native}
# NVLink multicast stays off in every rank (device_env.sh sets these; mpirun passes the local
# environment on to the ranks it starts).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
