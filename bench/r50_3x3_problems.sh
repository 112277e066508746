# Sourced by the convbench device scripts: ResNet-50's seven 3x3 convolutions at batch 128
# (torchvision v1.5: the stride-2 ones included) as --problem flags in the array R50_3X3_PROBLEMS.
R50_3X3_PROBLEMS=()
for p in c=64,h=56,w=56,k=64 c=128,h=56,w=56,k=128,stride=2 c=128,h=28,w=28,k=128 c=256,h=28,w=28,k=256,stride=2 \
         c=256,h=14,w=14,k=256 c=512,h=14,w=14,k=512,stride=2 c=512,h=7,w=7,k=512; do
  R50_3X3_PROBLEMS+=(--problem "n=128,$p,r=3,s=3,pad=1")
done
